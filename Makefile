# Every target is the make.py task of the same name, forwarded by the one rule
# below: `make docs` runs `python3 make.py docs`. Extra arguments go in ARGS,
# e.g.  make bench ARGS="--jobs 100". `make` alone lists the tasks.
.DEFAULT_GOAL := help
PYTHON ?= python3
.PHONY: help FORCE

help: ; @$(PYTHON) make.py help
Makefile: ;  # never remade by the rule below
# FORCE (phony, so always out of date) makes the rule run even where a file of the
# target's name exists: `make docs` beside the docs/ folder.
%: FORCE ; $(PYTHON) make.py $@ $(ARGS)
