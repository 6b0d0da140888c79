-- violations.sql: the recorded violations of one result (the first --max-violations), at their
-- coordinates. Not the result's totals (result.sql). Parameter :id (results.id).
SELECT element, coordinates, iif(expected IS NULL, 'NaN', printf('%.17g', expected)) AS expected,
       iif(got IS NULL, 'NaN', printf('%.17g', got)) AS got,
       printf('%.3g', bound) AS bound
FROM violations
WHERE result = :id
ORDER BY element;
