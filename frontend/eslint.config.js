// SPDX-License-Identifier: Apache-2.0
// ESLint for the console (flat config): typescript-eslint's recommended rules with type information,
// and the React hooks rules (dependency lists, rules of hooks), and the console's layers (below, with
// eslint-plugin-import-x: no import circle, and each layer imports only the layers under it).
// `npm run lint`; scripts/lint.sh runs it in `make test`.
import { readdirSync } from "node:fs";
import js from "@eslint/js";
import globals from "globals";
import importX, { createNodeResolver } from "eslint-plugin-import-x";
import reactHooks from "eslint-plugin-react-hooks";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/api/schema.d.ts"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.browser, ...globals.node },
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "react-hooks": reactHooks },
    rules: {
      "react-hooks/rules-of-hooks": "error",
      "react-hooks/exhaustive-deps": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      // Test doubles and fixtures build partial API objects on purpose.
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
    },
  },
  // Layers, each importing only those under it: App.tsx, Layout.tsx, main.tsx → pages/ (screens that
  // compose several features) → features/<name>/ (one feature each; never another feature) → shared/
  // (widgets, hooks and models more than one feature uses) → api/ (the typed client and every server
  // query) → lib/ (pure helpers).
  {
    files: ["src/**/*.{ts,tsx}"],
    plugins: { "import-x": importX },
    settings: {
      "import-x/extensions": [".ts", ".tsx", ".js"],
      "import-x/parsers": { "@typescript-eslint/parser": [".ts", ".tsx"] },
      "import-x/resolver-next": [createNodeResolver({ extensions: [".ts", ".tsx", ".js"] })],
    },
    rules: {
      "import-x/no-cycle": "error",
      "import-x/no-restricted-paths": ["error", { zones: layerZones() }],
    },
  },
  {
    files: ["**/*.js"],
    ...tseslint.configs.disableTypeChecked,
  },
);

/** The forbidden imports of each layer (import-x's no-restricted-paths zones). */
function layerZones() {
  const app = ["./src/App.tsx", "./src/Layout.tsx", "./src/main.tsx"];
  const features = readdirSync(new URL("./src/features", import.meta.url));
  return [
    {
      target: "./src/lib",
      from: ["./src/api", "./src/shared", "./src/features", "./src/pages", ...app],
      message: "lib/ holds pure helpers: it imports no other layer.",
    },
    {
      target: "./src/api",
      from: ["./src/shared", "./src/features", "./src/pages", ...app],
      message: "api/ imports only lib/.",
    },
    {
      target: "./src/shared",
      from: ["./src/features", "./src/pages", ...app],
      message: "shared/ imports only api/ and lib/: move what a feature and shared/ both need into shared/.",
    },
    ...features.map((f) => ({
      target: `./src/features/${f}`,
      from: ["./src/features", "./src/pages", ...app],
      except: [`./${f}`],
      message:
        "A feature imports shared/, api/ and lib/, never another feature: move what two features use " +
        "into shared/, or compose them in pages/.",
    })),
  ];
}
