# SPDX-License-Identifier: Apache-2.0
"""The Hotpath backend: REST and WebSocket API for the console, gRPC server for agents, Postgres storage."""
