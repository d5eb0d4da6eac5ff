// SPDX-License-Identifier: Apache-2.0
// Routes of the console: login, host list, host (code tree / top functions), function view, plan, admin.
import { Link, Route, Routes } from "react-router-dom";
import { Layout } from "./Layout";
import { LoginPage } from "./features/auth/LoginPage";
import { RequireAuth } from "./features/auth/RequireAuth";
import { HostsPage } from "./features/hosts/HostsPage";
import { HostPage } from "./pages/HostPage";
import { FunctionPage } from "./features/functions/FunctionPage";
import { AdminPage } from "./features/admin/AdminPage";
import { MeasurePage } from "./features/measure/MeasurePage";
import { PlanPage } from "./features/plans/PlanPage";

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
        <Route index element={<HostsPage />} />
        <Route path="hosts/:hostId" element={<HostPage />} />
        <Route path="hosts/:hostId/functions/:functionId" element={<FunctionPage />} />
        <Route path="hosts/:hostId/measure" element={<MeasurePage />} />
        <Route path="hosts/:hostId/plans/:planId" element={<PlanPage />} />
        <Route path="admin" element={<AdminPage />} />
        <Route path="*" element={<NotFound />} />
      </Route>
    </Routes>
  );
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
