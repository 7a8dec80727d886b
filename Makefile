# Quick start: `make up` then open http://127.0.0.1:8000 ; `make test` runs every test.
.PHONY: up down test test-fast lint install base-image images

up:
	scripts/up.sh

down:
	scripts/down.sh

install:
	scripts/install.sh dev

# Every test, including the slow ones (real Celery worker, real Chromium), on TEST_WORKERS processes
# (pytest-xdist, each test sent to the next free process; each process has its own test database, Redis
# databases and ports for the fault tests' private stacks). Most slow tests wait on a container or a worker
# process, so more processes than cores pay off. TEST_WORKERS=0 runs in this process. Each process (and the
# Celery workers it starts) computes on one OpenMP thread: torch's second thread per process only spins
# against the other processes on a 2-core machine.
TEST_WORKERS ?= 3
test: install
	@scripts/ensure-services.sh
	OMP_NUM_THREADS=1 .venv/bin/python -m pytest -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS)

# The linter's rules (pyproject.toml [tool.ruff]); .ci/run runs it before the tests.
lint: install
	.venv/bin/ruff check .

# Skip the slow tests and those that need podman, Chromium or a Celery worker process (tests/conftest.py marks
# a test by the fixtures it uses).
test-fast: install
	@scripts/ensure-services.sh
	.venv/bin/python -m pytest -m "not slow and not container and not browser and not worker and not compose" $(PYTEST_ARGS)

# The offline base image of method containers (python3 + numpy from Debian packages); cached.
base-image: install
	scripts/build-base-image.sh

# The images of docker-compose.yml, from Debian packages and a wheelhouse (no registry); cached.
images: install
	scripts/build-images.sh
