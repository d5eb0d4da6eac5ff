# SPDX-License-Identifier: Apache-2.0
# How the lane's guest agent proves itself to the backend: the one place that knows the backend's
# agent credentials, so a change of scheme changes only this file (sourced by lane.sh and test.sh).
#
# Agents enrol per host (docs/security.md): an admin creates a one-time enrolment token through the
# REST API, the agent sends it with a certificate signing request for its host id to the enrolment
# port, and from then on connects with its own certificate (mutual TLS). The guest keeps no state
# between boots, so every boot enrols its host id afresh: the token is bound to that host id, which
# is what lets it replace the certificate an earlier boot of the same guest got.

# lane_credentials_ready DATA_DIR: whether the backend of DATA_DIR can hand out credentials yet
# (it writes its CA and the admin password on first start).
lane_credentials_ready() {
	[ -s "$1/tls/ca.pem" ] && [ -s "$1/admin-password" ]
}

# lane_credentials DATA_DIR URL HOST_ID DEST: put what the guest's hotpathd needs into DEST (it
# appears in the guest as /lane/) and print the `hotpathd run` arguments that use it, as guest paths.
# DATA_DIR is the installation's data folder, URL its console and REST API, HOST_ID the guest's.
# Fails (status 1) with the reason on stderr.
lane_credentials() {
	local data=$1 url=$2 host_id=$3 dest=$4 curl=(curl -fsS --max-time 30) access body created port
	fail() {
		printf '[lane] error: %s\n' "$*" >&2
		return 1
	}
	lane_credentials_ready "$data" || fail "no CA or admin password in $data: is the backend of that data folder running?" || return 1
	command -v jq >/dev/null || fail "jq is missing: run ./scripts/install-deps.sh run" || return 1
	case "$url" in https:*) curl+=(--cacert "$data/tls/ca.pem") ;; esac
	body=$(jq -cn --arg p "$(cat "$data/admin-password")" '{username: "admin", password: $p}')
	access=$("${curl[@]}" -H 'content-type: application/json' -d "$body" "$url/api/v1/auth/login" | jq -r .access_token) ||
		fail "could not sign in as admin at $url to create the guest's enrolment token" || return 1
	body=$(jq -cn --arg h "$host_id" '{note: "the kernel lane guest", hours: 1, host_id: $h}')
	created=$("${curl[@]}" -H "Authorization: Bearer $access" -H 'content-type: application/json' -d "$body" \
		"$url/api/v1/enrolment-tokens") || fail "could not create an enrolment token for the guest at $url" || return 1
	(
		umask 077
		jq -r .token <<<"$created" >"$dest/enroll-token"
		jq -r .ca_pem <<<"$created" >"$dest/ca.pem"
	)
	port=$(jq -r .enroll_port <<<"$created")
	echo "--state-dir /lane/agent-state --enroll-token-file /lane/enroll-token --ca-file /lane/ca.pem" \
		"--enroll-server $lane_host_addr:$port"
}
