// SPDX-License-Identifier: Apache-2.0
// The typed REST client: openapi-fetch over the paths generated from the backend's OpenAPI
// document. Every request carries the bearer token; any 401 ends the session so the console
// returns to the login page; failures become ApiError with the server's `detail` text, which the
// screens show as is (e.g. "Host is offline").
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "./schema";
import { getToken, setSession } from "./session";

export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

/** The human-readable reason in a FastAPI error body: a string, or validation errors. */
export function errorDetail(body: unknown, status: number): string {
  if (body && typeof body === "object" && "detail" in body) {
    const detail: unknown = body.detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      const parts = (detail as unknown[]).map((d) => {
        if (d && typeof d === "object" && "msg" in d) {
          const loc = "loc" in d && Array.isArray(d.loc) ? d.loc.slice(1).join(".") : "";
          return loc ? `${loc}: ${String(d.msg)}` : String(d.msg);
        }
        return String(d);
      });
      if (parts.length) return parts.join("; ");
    }
  }
  if (typeof body === "string" && body.trim()) return body.trim();
  return status ? `Request failed with status ${status}` : "Network error: the server did not answer";
}

export interface ClientOptions {
  fetch?: (input: Request) => Promise<Response>;
  baseUrl?: string;
}

export function createApiClient(options: ClientOptions = {}) {
  const client = createClient<paths>({
    baseUrl: options.baseUrl ?? (typeof window !== "undefined" ? window.location.origin : ""),
    // Looked up per request, not captured once, so tests and polyfills can replace it.
    fetch: options.fetch ?? ((request: Request) => globalThis.fetch(request)),
  });
  const auth: Middleware = {
    onRequest({ request }) {
      const token = getToken();
      if (token) request.headers.set("Authorization", `Bearer ${token}`);
      return request;
    },
    onResponse({ request, response }) {
      // A wrong password at login is a 401 too, but it is the login form's to show.
      if (response.status === 401 && !new URL(request.url).pathname.endsWith("/auth/login")) {
        setSession(null);
      }
      return response;
    },
  };
  client.use(auth);
  return client;
}

export type ApiClient = ReturnType<typeof createApiClient>;

export const api: ApiClient = createApiClient();

/** The data of an openapi-fetch result, or an ApiError carrying the server's reason. */
export async function unwrap<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let result: { data?: T; error?: unknown; response: Response };
  try {
    result = await call;
  } catch (e) {
    throw new ApiError(0, errorDetail(null, 0) + (e instanceof Error ? ` (${e.message})` : ""));
  }
  const { data, error, response } = result;
  if (!response.ok || error !== undefined) {
    throw new ApiError(response.status, errorDetail(error, response.status));
  }
  return data as T;
}
