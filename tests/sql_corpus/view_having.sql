-- A view filtering and computing before a TUMBLE, HAVING and expressions over
-- the aggregates after it.
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

CREATE TEMPORARY VIEW positive AS
SELECT user_id, qty * 10 AS qty10, price, ts
FROM events
WHERE qty > 0 AND price IS NOT NULL;

CREATE TABLE results (
  user_id STRING,
  window_start TIMESTAMP(3),
  doubled INT,
  cnt_plus BIGINT,
  spread DECIMAL(11, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id, window_start, SUM(qty10) * 2, COUNT(*) + 1, MAX(price) - MIN(price)
FROM TABLE(TUMBLE(TABLE positive, DESCRIPTOR(ts), INTERVAL '20' SECOND))
GROUP BY window_start, window_end, user_id
HAVING COUNT(*) > 2 AND SUM(qty10) > 500;
