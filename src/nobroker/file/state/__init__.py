"""The pure replay state: decoded records in, queue state out (no os, time, random
or threads), and the commands that plan the records an API call writes."""
