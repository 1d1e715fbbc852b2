"""memd: a memory daemon for AI agents (plain files, git-versioned, budgets enforced unattended)."""

__version__ = "0.1.0"
