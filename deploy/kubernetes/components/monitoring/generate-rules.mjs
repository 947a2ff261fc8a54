// Writes prometheus-rule.yaml beside this file from docker/alerts.yml, the one source of the alert
// rules (compose's Prometheus loads that file as it is): `npm run k8s:rules` after changing them.
// test/unit/kubernetes-manifests.test.ts fails while the two differ.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';

const rules = parse(readFileSync(fileURLToPath(new URL('../../../../docker/alerts.yml', import.meta.url)), 'utf8'));
const rule = {
  apiVersion: 'monitoring.coreos.com/v1',
  kind: 'PrometheusRule',
  metadata: { name: 'nucleus-webhooks' },
  spec: rules,
};
const header = '# Generated from docker/alerts.yml by `npm run k8s:rules`: change that file, then run it.\n';
writeFileSync(fileURLToPath(new URL('prometheus-rule.yaml', import.meta.url)), header + stringify(rule, { lineWidth: 0 }));
