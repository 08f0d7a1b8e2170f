-- An updating GROUP BY into PostgreSQL keyed by the group key: every
-- aggregate, NULLs skipped, AVG of an INT truncated, COUNT(DISTINCT).
-- postgres: CREATE TABLE ${TABLE} (item integer PRIMARY KEY, n bigint, n_tag bigint, qty_sum integer, price_min numeric(10, 2), score_max double precision, qty_avg integer, users bigint)
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/events.csv',
  'format' = 'csv',
  'csv.null-literal' = 'NULL'
);

CREATE TABLE results (
  item INT,
  n BIGINT,
  n_tag BIGINT,
  qty_sum INT,
  price_min DECIMAL(10, 2),
  score_max DOUBLE,
  qty_avg INT,
  users BIGINT,
  PRIMARY KEY (item) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = '${JDBC_URL}',
  'table-name' = '${TABLE}',
  'username' = 'floe',
  'password' = 'floe'
);

INSERT INTO results
SELECT item, COUNT(*), COUNT(tag), SUM(qty), MIN(price), MAX(score), AVG(qty), COUNT(DISTINCT user_id)
FROM events
GROUP BY item;
