"""The provider's money: the channel book, receipts and acceptances, its bond."""
