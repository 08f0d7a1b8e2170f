-- Timestamps: comparison with a literal, ± INTERVAL, TO_TIMESTAMP of a string,
-- TO_TIMESTAMP_LTZ of epoch milliseconds, written as Flink's csv format writes
-- them.
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
  order_id BIGINT,
  ts TIMESTAMP_LTZ(3),
  later TIMESTAMP_LTZ(3),
  parsed TIMESTAMP(3),
  from_seconds TIMESTAMP_LTZ(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT order_id, ts, ts + INTERVAL '90' MINUTE, TO_TIMESTAMP('2024-03-0' || CAST(MOD(order_id, 9) + 1 AS STRING) || ' 10:20:30'),
  TO_TIMESTAMP_LTZ(epoch_ms / 1000, 0)
FROM orders
WHERE ts > TO_TIMESTAMP_LTZ(1704067500000, 3) AND MOD(order_id, 5) = 0;
