# SPDX-License-Identifier: Apache-2.0
# The console: built with Vite, served by nginx, which proxies /api (REST and WebSocket) to the backend.
FROM node:20-bookworm AS build
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm install --no-save --no-audit --no-fund
COPY frontend ./
RUN npx vite build

FROM nginx:1.27-bookworm
COPY deploy/nginx.conf /etc/nginx/conf.d/default.conf
COPY --from=build /src/frontend/dist /usr/share/nginx/html
