-- WHERE with three-valued logic: a row is kept only when the condition is TRUE
-- (a comparison with NULL is NULL); NOT, OR, IS NULL, LIKE, BETWEEN.
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/events.csv',
  'format' = 'csv',
  'csv.null-literal' = 'NULL',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TABLE results (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  tag STRING,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id, item, qty, price, tag, ts
FROM events
WHERE (NOT (qty > 10) OR price IS NULL)
  AND (tag <> 'red' OR score BETWEEN -10 AND 10)
  AND user_id NOT IN ('u5', 'u6')
  AND NOT (tag LIKE 'G_EEN');
