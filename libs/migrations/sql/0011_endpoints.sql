-- A merchant has endpoints (issue 56): its one `webhook` becomes the first of a list, each with an
-- id of its own (`ep_…`), by which its runtime state (failing clock, throttle, waits) is keyed.
-- The sealed secrets of a row written before this stay as they are; libs/merchants/rows.ts reads
-- them as the first endpoint's until the row is next written.
ALTER TABLE merchants RENAME COLUMN webhook TO endpoints;
UPDATE merchants
   SET endpoints = CASE WHEN endpoints IS NULL OR jsonb_typeof(endpoints) <> 'object' THEN '[]'::jsonb
                        ELSE jsonb_build_array(jsonb_build_object('id', 'ep_' || substr(md5(id), 1, 22)) || endpoints) END;
ALTER TABLE merchants ALTER COLUMN endpoints SET DEFAULT '[]'::jsonb, ALTER COLUMN endpoints SET NOT NULL;
