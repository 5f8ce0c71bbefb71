# cdn-proxy in a container. Build and run (README: "Running it in a container"):
#   docker build -t cdn-proxy .
#   docker run --rm -p 8080:8080 -p 8081:8081 \
#       -v "$PWD/my-proxy.toml:/etc/cdn-proxy/proxy.toml:ro" -v cdn-proxy-state:/var/lib/cdn-proxy \
#       cdn-proxy
# The config must listen on 0.0.0.0 (or [::]) to be reachable from outside the container and
# keep its state under /var/lib/cdn-proxy (config/production.toml does both).
# The wheel is built in the full image, which has gcc: it carries the hit lane's C head reader
# (proxy/core/http/_lane.c, decision 0055). The slim image that runs it has no compiler.
FROM python:3.11 AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY proxy ./proxy
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

RUN useradd --system --home-dir /var/lib/cdn-proxy --shell /usr/sbin/nologin cdn-proxy \
    && mkdir -p /etc/cdn-proxy /var/lib/cdn-proxy /var/log/cdn-proxy \
    && chown cdn-proxy:cdn-proxy /var/lib/cdn-proxy /var/log/cdn-proxy

COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --disable-pip-version-check /wheels/*.whl \
    && rm -rf /wheels \
    && python -c "from proxy.core.http import lane; assert lane.READER == 'c', lane.READER"

USER cdn-proxy
VOLUME ["/var/lib/cdn-proxy"]
EXPOSE 8080 8443 8081
# SIGTERM drains in-flight requests (edge.shutdown_timeout); give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cdn-proxy"]
CMD ["serve", "--config", "/etc/cdn-proxy/proxy.toml"]
