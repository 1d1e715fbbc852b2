"""The three memory tiers: pure formats and their stores."""
