mod plan_cycle;
mod provider_settings;
