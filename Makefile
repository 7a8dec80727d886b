# Quick start: `make up` then open http://127.0.0.1:8000 ; `make test` runs every test.
.PHONY: up down test test-fast lint install base-image images

up:
	scripts/up.sh

down:
	scripts/down.sh

install:
	scripts/install.sh dev

# Every test, including the slow ones (real Celery worker, real Chromium), on TEST_WORKERS processes
# (pytest-xdist; each has its own test database and Redis databases). Most slow tests wait on a container or a
# worker process, so more processes than cores pay off; the tests that drive Chromium share one process
# (tests/conftest.py CHROMIUM_GROUP), a module's tests another. TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 3
test: install
	@scripts/ensure-services.sh
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

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
