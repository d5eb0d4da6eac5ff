# SPDX-License-Identifier: Apache-2.0
"""Storage: the SQL of each domain (users, hosts, functions, samples, stacks, targets, measurements,
catalog pieces) and the series; no HTTP, no gRPC, no workflow."""
