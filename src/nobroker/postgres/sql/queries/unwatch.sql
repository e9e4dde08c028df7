DELETE FROM {schema}.watches WHERE queue = %(q)s AND id = %(id)s
