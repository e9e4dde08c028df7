"""The PostgreSQL backend: the contract on a server, and what only PostgreSQL has to show."""
