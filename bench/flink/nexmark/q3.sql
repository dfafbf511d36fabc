-- q3, local item suggestion: a regular (unbounded) inner join, each match emitted once,
-- whichever side comes first; an inner join of two insert-only inputs is insert-only.
CREATE TABLE sink (name STRING, city STRING, state STRING, id BIGINT) WITH (${append_sink});

INSERT INTO sink
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca');
