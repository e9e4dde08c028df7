-- The job's row share-locked, so that an ack waits for the watch (wakeups._watch).
SELECT 1 FROM {schema}.jobs WHERE queue = %(q)s AND id = %(id)s FOR SHARE
