"""memd's fact-recall evaluation (`make eval`): scripted agent sessions with known facts, run against a real daemon,
measuring what of them an agent can still load after checkpoints. See eval/README.md."""
