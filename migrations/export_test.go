package migrations

import "io/fs"

// Files is the embedded migrations, for the tests in migrations_test that
// read their text.
var Files fs.FS = files
