// SPDX-License-Identifier: Apache-2.0
// Routes of the console: login, the first screen (the fleet once more than one host exists, else the host
// list), host list, a fleet group's hot code, flame graph and compare, the plans installed across the fleet, host (code tree / top functions), function view, plan,
// roll-outs, admin.
import { Link, Route, Routes } from "react-router-dom";
import { Layout } from "./Layout";
import { LoginPage } from "./features/auth/LoginPage";
import { RequireAuth } from "./features/auth/RequireAuth";
import { HostsPage } from "./features/hosts/HostsPage";
import { HostPage } from "./pages/HostPage";
import { FunctionPage } from "./features/functions/FunctionPage";
import { AdminPage } from "./features/admin/AdminPage";
import { MeasurePage } from "./features/measure/MeasurePage";
import { PlanRoute } from "./pages/PlanRoute";
import { FleetPage } from "./features/fleet/FleetPage";
import { FleetGroupPage } from "./pages/FleetGroupPage";
import { FleetPlansPage } from "./features/fleet/FleetPlansPage";
import { RolloutPage } from "./features/rollouts/RolloutPage";
import { RolloutsPage } from "./features/rollouts/RolloutsPage";
import { useHosts } from "./api/queries";

export function App() {
  return (
    <Routes>
      <Route path="/login" element={<LoginPage />} />
      <Route
        element={
          <RequireAuth>
            <Layout />
          </RequireAuth>
        }
      >
        <Route index element={<Home />} />
        <Route path="hosts" element={<HostsPage />} />
        <Route path="fleet/groups/:groupId" element={<FleetGroupPage />} />
        <Route path="fleet/plans" element={<FleetPlansPage />} />
        <Route path="hosts/:hostId" element={<HostPage />} />
        <Route path="hosts/:hostId/functions/:functionId" element={<FunctionPage />} />
        <Route path="hosts/:hostId/measure" element={<MeasurePage />} />
        <Route path="hosts/:hostId/plans/:planId" element={<PlanRoute />} />
        <Route path="rollouts" element={<RolloutsPage />} />
        <Route path="rollouts/:rolloutId" element={<RolloutPage />} />
        <Route path="admin" element={<AdminPage />} />
        <Route path="*" element={<NotFound />} />
      </Route>
    </Routes>
  );
}

/** The fleet page once more than one host exists (active, and connected at least once, so its kernel is
 *  known); with one host (or none) the host list, as before. */
function Home() {
  const hosts = useHosts();
  const fleet = (hosts.data ?? []).filter((h) => h.status === "active" && h.connected_at !== null);
  if (fleet.length > 1) return <FleetPage />;
  return <HostsPage />;
}

function NotFound() {
  return (
    <section className="notice">
      <h1>Page not found</h1>
      <p>
        <Link to="/">Back to the host list</Link>
      </p>
    </section>
  );
}
