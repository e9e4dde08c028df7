-- Version 4 is the pgdeps branch's migration; this placeholder (a statement
-- that changes nothing) only keeps the numbers consecutive until that branch
-- is merged, when its 0004 replaces this file.
SELECT 1;
