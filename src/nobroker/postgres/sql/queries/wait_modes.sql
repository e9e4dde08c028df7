-- Each waiting job's mode (waits.mode, migrations/0004), for `nobroker migrate`.
SELECT id, mode FROM {schema}.waits WHERE queue = %(q)s
