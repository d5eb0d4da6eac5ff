// SPDX-License-Identifier: Apache-2.0
// Whether the signed-in user is an admin (the server checks every admin call again).
import { useMe } from "../../api/queries";
import { useAuth } from "../../shared/AuthContext";

export function useIsAdmin(): boolean {
  const { session } = useAuth();
  const me = useMe(!!session);
  return (me.data ?? session?.user)?.role === "admin";
}
