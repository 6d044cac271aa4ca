int plus_one(int x) { return x + 1; }
