-- Arithmetic with NULLs: INT division truncating, MOD and ABS of negatives,
-- decimal +, *, / with Flink's result types, DOUBLE, casts and COALESCE.
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
  qty INT,
  plus INT,
  times BIGINT,
  div3 INT,
  mod7 INT,
  absq INT,
  neg INT,
  cost DECIMAL(20, 2),
  quarter DECIMAL(21, 13),
  bumped DECIMAL(12, 3),
  dbl DOUBLE,
  price_int INT,
  score_big BIGINT,
  qty_dec DECIMAL(5, 1),
  price_dbl DOUBLE,
  qty_or DECIMAL(10, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT qty, qty + item, CAST(qty AS BIGINT) * 1000000000, qty / 3, MOD(qty, 7), ABS(qty - 20),
  -qty, price * qty, price / 4, price + 0.005, score * 2 + 0.5, CAST(price AS INT),
  CAST(score AS BIGINT), CAST(qty AS DECIMAL(5, 1)), CAST(price AS DOUBLE),
  COALESCE(price, CAST(qty AS DECIMAL(10, 2)))
FROM events
WHERE item IN (2, 4, 6, 11);
