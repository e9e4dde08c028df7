# Aliases for make.py: each target runs the make.py task of the same name.
# Extra arguments go in ARGS, e.g.  make bench ARGS="--jobs 100"
.DEFAULT_GOAL := help
PYTHON ?= python3
.PHONY: help test test-quick demo video-demo build check-deps deps-proof bench bench-md bench-peers profile torture lint cli clean

help: ; @$(PYTHON) make.py help
test: ; $(PYTHON) make.py test $(ARGS)
test-quick: ; $(PYTHON) make.py test-quick $(ARGS)
demo: ; $(PYTHON) make.py demo $(ARGS)
video-demo: ; $(PYTHON) make.py video-demo $(ARGS)
build: ; $(PYTHON) make.py build $(ARGS)
check-deps: ; $(PYTHON) make.py check-deps $(ARGS)
deps-proof: ; $(PYTHON) make.py deps-proof $(ARGS)
bench: ; $(PYTHON) make.py bench $(ARGS)
bench-md: ; $(PYTHON) make.py bench-md $(ARGS)
bench-peers: ; $(PYTHON) make.py bench-peers $(ARGS)
profile: ; $(PYTHON) make.py profile $(ARGS)
torture: ; $(PYTHON) make.py torture $(ARGS)
lint: ; $(PYTHON) make.py lint $(ARGS)
cli: ; $(PYTHON) make.py cli $(ARGS)
clean: ; $(PYTHON) make.py clean $(ARGS)
