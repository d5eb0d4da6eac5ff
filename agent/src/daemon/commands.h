/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command dispatch: every Command from the backend is answered by exactly one
 * CommandResult carrying its id.
 */
#ifndef HOTPATH_DAEMON_COMMANDS_H
#define HOTPATH_DAEMON_COMMANDS_H

#include "hotpath/v1/agent.pb-c.h"

struct agent;
struct hp_stream;

void hp_handle_command(struct agent *ag, struct hp_stream *st, const Hotpath__V1__Command *c);

#endif
