"""`unchained provider ...`: the operator's commands."""
