-- q8, new users: per tumbling 10 s window the persons who registered and created an auction
-- in it, {id, name, window_start}: Nexmark's window join of the persons' and the sellers'
-- windows, final and insert-only.
CREATE TABLE sink (id BIGINT, name STRING, window_start BIGINT) WITH (${append_sink});

CREATE VIEW persons AS
SELECT id, name, window_start, window_end
FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY id, name, window_start, window_end;

CREATE VIEW sellers AS
SELECT seller, window_start, window_end
FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY seller, window_start, window_end;

INSERT INTO sink
SELECT P.id, P.name,
  CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', P.window_start) AS BIGINT) * 1000
FROM persons AS P JOIN sellers AS A
ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end;
