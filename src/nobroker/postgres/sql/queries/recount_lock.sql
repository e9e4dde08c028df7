-- A recount locks the jobs against writes (readers go on): no write is counted
-- twice or missed.
LOCK TABLE {schema}.jobs IN EXCLUSIVE MODE
