# context-proxy: docker build -t context-proxy . && docker run -p 8787:8787 context-proxy
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    CONTEXT_PROXY_SERVER_HOST=0.0.0.0 \
    CONTEXT_PROXY_STORE_PATH=/data/context-proxy.db

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip install '.[redis]' \
 && useradd --system --uid 10001 --home-dir /data --create-home proxy

USER proxy
VOLUME ["/data"]
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status == 200 else 1)"
ENTRYPOINT ["context-proxy"]
CMD ["serve"]
