"""`unchained job | channel | endpoint | pod ...`: the renter's commands."""
