# SPDX-License-Identifier: Apache-2.0
"""The gRPC side of the backend: the AgentService that agents stream to."""
