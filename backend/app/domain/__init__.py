# SPDX-License-Identifier: Apache-2.0
"""The workflows: commands for agents, code positioning plans and their checks, enrolment."""
