#!/usr/bin/env bash
# Vendors GraphiQL and what its browser bundle needs into this directory, from npm, so that the
# GraphiQL page of `GET /graphql` loads nothing from the internet (src/http/graphiql.rs embeds
# these files in the binary). Run from anywhere, with Node and npm:
#
#   bash assets/graphiql/vendor.sh
#
# To upgrade, change a version below, run the script, check the page (the browser test,
# tests/browser/graphiql.mjs), and commit the files it wrote. GraphiQL 3 is the last line that
# ships a bundle usable without a bundler (a UMD build on the React 18 UMD globals, with the
# graphql-transport-ws client inside); GraphiQL 4 deprecates it and 5 drops it.
set -euo pipefail

GRAPHIQL=3.9.0
REACT=18.3.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat >"$work/package.json" <<EOF
{
  "private": true,
  "dependencies": {
    "graphiql": "$GRAPHIQL",
    "react": "$REACT",
    "react-dom": "$REACT"
  }
}
EOF
# No install scripts: only files of the packages are used.
npm install --prefix "$work" --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null

modules="$work/node_modules"
cp "$modules/graphiql/graphiql.min.js" "$here/graphiql.min.js"
cp "$modules/graphiql/graphiql.min.css" "$here/graphiql.min.css"
cp "$modules/react/umd/react.production.min.js" "$here/react.production.min.js"
cp "$modules/react-dom/umd/react-dom.production.min.js" "$here/react-dom.production.min.js"

# The licences: the three packages', then those of every package npm installed with them (the
# GraphiQL bundle contains its dependencies: CodeMirror, graphql-js, graphql-ws, Radix, …).
node - "$modules" "$here/LICENSES.txt" <<'EOF'
const fs = require('fs');
const path = require('path');
const [modules, out] = process.argv.slice(2);
const found = [];
const visit = (dir) => {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
    const pkgDir = path.join(dir, entry.name);
    if (entry.name.startsWith('@')) { visit(pkgDir); continue; }
    const manifest = path.join(pkgDir, 'package.json');
    if (fs.existsSync(manifest)) {
      const pkg = JSON.parse(fs.readFileSync(manifest, 'utf8'));
      const file = fs.readdirSync(pkgDir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
      found.push({ name: pkg.name, version: pkg.version, license: pkg.license || '(see text)',
                   text: file ? fs.readFileSync(path.join(pkgDir, file), 'utf8').trim() : null });
    }
    const nested = path.join(pkgDir, 'node_modules');
    if (fs.existsSync(nested)) visit(nested);
  }
};
visit(modules);
// Type definitions are not shipped.
const shipped = found.filter((p) => !p.name.startsWith('@types/'));
const first = ['graphiql', 'react', 'react-dom'];
shipped.sort((a, b) => {
  const [ia, ib] = [first.indexOf(a.name), first.indexOf(b.name)];
  if (ia !== ib) return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
  return a.name < b.name ? -1 : a.name > b.name ? 1 : a.version < b.version ? -1 : 1;
});
const seen = new Set();
let text = 'Licences of the files in this directory: graphiql.min.js and graphiql.min.css (graphiql),\n' +
  'react.production.min.js (react), react-dom.production.min.js (react-dom), and of the packages\n' +
  'bundled in them. Written by vendor.sh from the packages npm installed with those three; the\n' +
  'bundles were built by their own releases, whose versions of the bundled packages may differ\n' +
  'from the ones named here.\n';
for (const p of shipped) {
  const key = `${p.name}@${p.version}`;
  if (seen.has(key)) continue;
  seen.add(key);
  text += `\n${'='.repeat(78)}\n${key} (${p.license})\n${'='.repeat(78)}\n\n`;
  text += (p.text || `No licence file in the package; its package.json says: ${p.license}`) + '\n';
}
fs.writeFileSync(out, text);
EOF

cat >"$here/VERSIONS" <<EOF
graphiql $GRAPHIQL
react $REACT
react-dom $REACT
EOF

cd "$here"
sha256sum graphiql.min.js graphiql.min.css react.production.min.js react-dom.production.min.js >SHA256SUMS
du -cb graphiql.min.js graphiql.min.css react.production.min.js react-dom.production.min.js LICENSES.txt | tail -n 1
