# SPDX-License-Identifier: Apache-2.0
# The load balancer in front of the backend replicas: Debian 12's HAProxy 2.6 (the version the
# failover test runs), with deploy/haproxy.cfg (written by deploy/haproxy_config.py).
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends haproxy && rm -rf /var/lib/apt/lists/*
COPY deploy/haproxy.cfg /etc/haproxy/haproxy.cfg
EXPOSE 8080 50051 50052
CMD ["haproxy", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
