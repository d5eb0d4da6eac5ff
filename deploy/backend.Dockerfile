# SPDX-License-Identifier: Apache-2.0
# The backend: REST + WebSocket for the console and the gRPC server for agents, on Python 3.11.
FROM python:3.11-slim-bookworm
WORKDIR /app
COPY backend/requirements.txt backend/requirements.txt
RUN pip install --no-cache-dir -r backend/requirements.txt
COPY proto proto
COPY backend backend
RUN cd backend && python -m grpc_tools.protoc -I../proto --python_out=app/gen --grpc_python_out=app/gen \
        ../proto/hotpath/v1/agent.proto
ENV HOTPATH_DATA_DIR=/data HOTPATH_STATIC_DIR=/nonexistent
EXPOSE 8080 50051
WORKDIR /app/backend
CMD ["python", "-m", "app"]
