"""Schedule tuning: the search space of a layer, features of its schedules, an XGBoost ranking
cost model, measurers behind one interface, append-only records, and the tuner that proposes
schedules by simulated annealing on the model."""
