"""The marketplace and settlement service: FastAPI app, SQLModel tables, chain follower,
settlement batcher, explorer and the renter's pages."""
