"""Quality estimates: features of the model's own making and the small estimator learnt from them."""
