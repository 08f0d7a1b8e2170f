-- UNION ALL of two tables and a subquery, with casts to common types.
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

CREATE TABLE orders (
  order_id BIGINT,
  user_id STRING,
  amount DECIMAL(12, 3),
  epoch_ms BIGINT,
  ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/orders.csv',
  'format' = 'csv',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TABLE results (
  source STRING,
  user_id STRING,
  amount DECIMAL(12, 3),
  big BOOLEAN
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT 'events', user_id, CAST(price AS DECIMAL(12, 3)), price > 500
FROM events
WHERE item < 4
UNION ALL
SELECT 'orders', user_id, amount, amount > 400
FROM orders
UNION ALL
SELECT s, u, a, FALSE
FROM (SELECT 'sub' AS s, user_id AS u, amount * 2 AS a FROM orders WHERE order_id < 1100) AS t
WHERE a < 0;
