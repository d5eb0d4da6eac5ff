// SPDX-License-Identifier: Apache-2.0
// The signed-in frame: header with navigation, live-update status, the user and sign-out; the
// live-update socket lives here so it runs exactly while someone is signed in.
import { Link, Outlet } from "react-router-dom";
import { useAuth } from "./shared/AuthContext";
import { useLiveUpdates } from "./api/live";
import { useMe } from "./api/queries";

export function Layout() {
  const { session, signOut } = useAuth();
  const live = useLiveUpdates(session?.token ?? null);
  const me = useMe(!!session);
  const user = me.data ?? session?.user ?? null;
  return (
    <div className="app">
      <header className="topbar">
        <Link to="/" className="brand">
          Hotpath
        </Link>
        <nav aria-label="Main">
          {/* A list, with spaces between the items, so the links read as separate words everywhere. */}
          <ul className="nav-links">
            <li>
              <Link to="/hosts">All hosts</Link>{" "}
            </li>
            <li>
              <Link to="/fleet/plans">Installed plans</Link>{" "}
            </li>
            <li>
              <Link to="/rollouts">Roll-outs</Link>{" "}
            </li>
            {user?.role === "admin" && (
              <li>
                <Link to="/admin">Admin</Link>{" "}
              </li>
            )}
          </ul>
        </nav>
        <span className={`live live-${live}`} title="Live updates from the server">
          {live === "open" ? "live" : live === "connecting" ? "connecting…" : "live updates paused"}
        </span>
        <span className="spacer" />
        {user && (
          <span className="user">
            {user.username} <span className="muted">({user.role})</span>
          </span>
        )}
        <button type="button" className="link-button" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main className="content">
        <Outlet />
      </main>
    </div>
  );
}
