mod plan_cycle;
