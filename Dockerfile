# replychain in a container: `docker compose up -d` (see compose.yaml and README.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin replychain

WORKDIR /app

# Runtime dependencies only, exactly as pinned by the lock file (no dev tools).
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

# The code runs from /app (python -m bot finds ./bot); config/ holds the default
# system prompt. Settings come from the environment (compose: env_file .env).
COPY bot ./bot
COPY transcript ./transcript
COPY config ./config

USER replychain

# SIGTERM lets answers in flight finish (SHUTDOWN_TIMEOUT, default 25 s).
STOPSIGNAL SIGTERM
CMD ["python", "-m", "bot"]
