# SPDX-License-Identifier: Apache-2.0
# How the lane's guest agent proves itself to the backend: the one place that knows the backend's
# agent credentials, so a change of scheme changes only this file (sourced by lane.sh and test.sh).
#
# lane_credentials DATA_DIR URL DEST: put what the guest's hotpathd needs into DEST (it appears in
# the guest as /lane/) and print the `hotpathd run` arguments that use it, as guest paths. DATA_DIR
# is the installation's data folder, URL its console and REST API (for a scheme that asks the
# backend for a credential, such as a one-time enrolment token created by the admin).
#
# Today an installation has one shared agent token, written by the backend to DATA_DIR/agent-token
# on first start (docs/security.md); the guest presents it like any other agent.
lane_credentials() {
	local data=$1 url=$2 dest=$3
	[ -s "$data/agent-token" ] || die "no agent token in $data/agent-token: is the backend of that data folder running?"
	install -m 0600 "$data/agent-token" "$dest/agent-token"
	echo "--token-file /lane/agent-token"
}
