// SPDX-License-Identifier: Apache-2.0
import { afterEach, describe, expect, it, vi } from "vitest";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { host, json, routeFetch } from "../../test/fixtures";
import { setSession } from "../../api/session";
import { HostLabels } from "./HostLabels";

function show(canEdit: boolean, over = {}) {
  const qc = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  return render(
    <QueryClientProvider client={qc}>
      <HostLabels host={host({ labels: { role: "web" }, agent_labels: { role: "web" }, ...over })} canEdit={canEdit} />
    </QueryClientProvider>,
  );
}

describe("host labels", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("lets an admin replace the labels, checking them before they are sent", async () => {
    setSession({ token: "t", user: { id: "u", username: "admin", role: "admin" } });
    const bodies: unknown[] = [];
    vi.stubGlobal(
      "fetch",
      routeFetch({
        "PUT /api/v1/hosts/host-1/labels": async (req) => {
          bodies.push(await req.json());
          return json(host({ labels: { role: "db", rack: "r1" } }));
        },
      }).fetch,
    );
    show(true);
    expect(screen.getByText("role=web")).toBeInTheDocument();
    expect(screen.getByText("from the agent's config")).toBeInTheDocument();
    fireEvent.click(screen.getByRole("button", { name: "Edit labels" }));
    const box = screen.getByRole("textbox", { name: /Labels, one key=value a line/ });
    fireEvent.change(box, { target: { value: "role=db\nbad key=x" } });
    fireEvent.click(screen.getByRole("button", { name: "Save labels" }));
    expect(await screen.findByRole("alert")).toHaveTextContent('"bad key" is not a label key');
    expect(bodies).toEqual([]);
    fireEvent.change(box, { target: { value: "role=db\nrack=r1" } });
    fireEvent.click(screen.getByRole("button", { name: "Save labels" }));
    await waitFor(() => expect(bodies).toEqual([{ labels: { role: "db", rack: "r1" } }]));
  });

  it("shows who set edited labels and what the agent reports, and no edit to a non-admin", () => {
    show(false, { labels: { role: "db" }, labels_edited_by: "alice", agent_labels: { role: "web" } });
    expect(screen.getByText("role=db")).toBeInTheDocument();
    expect(screen.getByText(/set by alice \(the agent reports role=web\)/)).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Edit labels" })).toBeNull();
  });
});
