int kace_cupti_placeholder;
