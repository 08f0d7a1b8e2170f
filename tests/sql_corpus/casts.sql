-- Casts: numbers, decimals (rounded half up) and timestamps to strings and
-- back, TRY_CAST of text that may not parse.
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
  score_text STRING,
  price_text STRING,
  ts_text STRING,
  qty_double DOUBLE,
  tag_int INT,
  price_7 DECIMAL(10, 4),
  score_dec DECIMAL(8, 1),
  price_back DECIMAL(12, 1),
  item_big BIGINT,
  qty_text STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT CAST(score AS STRING), CAST(price AS STRING), CAST(ts AS STRING), CAST(qty AS DOUBLE),
  TRY_CAST(TRIM(tag) AS INT), CAST(price / 7 AS DECIMAL(10, 4)), CAST(score AS DECIMAL(8, 1)),
  CAST(CAST(price AS STRING) AS DECIMAL(12, 1)), CAST(item AS BIGINT) * 3000000000,
  CAST(qty AS STRING) || '/' || CAST(item AS STRING)
FROM events
WHERE MOD(item, 3) = 0;
