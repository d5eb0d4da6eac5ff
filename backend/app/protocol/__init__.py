# SPDX-License-Identifier: Apache-2.0
"""What agents speak: the generated protocol (app.gen through app.protocol.proto) and the checks of
everything an agent sends (agent_input, catalog digests, measured edges)."""
