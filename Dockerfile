# context-proxy: docker build -t context-proxy . && docker run -p 8787:8787 context-proxy
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    CONTEXT_PROXY_SERVER_HOST=0.0.0.0 \
    CONTEXT_PROXY_STORE_PATH=/data/context-proxy.db \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# The runtime only (serve, its Redis backend and the reqwest transport, which has
# wheels for this glibc image): the demo tools and embedding recall are extras.
# tiktoken's encodings are fetched now, at build time, so a container without
# internet access still counts tokens exactly.
RUN pip install '.[redis,reqwest]' \
 && python -c "import tiktoken; [tiktoken.get_encoding(n) for n in ('o200k_base', 'cl100k_base')]" \
 && chmod -R a+rX /opt/tiktoken \
 && useradd --system --uid 10001 --home-dir /data --create-home proxy

USER proxy
VOLUME ["/data"]
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2).status == 200 else 1)"
ENTRYPOINT ["context-proxy"]
CMD ["serve"]
