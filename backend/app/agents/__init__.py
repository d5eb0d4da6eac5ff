# SPDX-License-Identifier: Apache-2.0
"""The agents' side of the backend: the AgentService that agents stream to (service) and the sessions
of the connected agents with their registry (sessions)."""
